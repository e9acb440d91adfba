"""CDK constructs for serverless-karpenter: one per concern, assembled by one stack per cluster."""

import os

# The jsii runtime behind aws_cdk prints a Node.js support banner on start; it is not actionable here.
for _variable, _value in (
    ("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20"),
    ("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1"),
    ("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1"),
):
    os.environ.setdefault(_variable, _value)
