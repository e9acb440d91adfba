"""CDK constructs for serverless-karpenter: one per concern, assembled by one stack per cluster."""
