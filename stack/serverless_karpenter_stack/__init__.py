"""What the deployed stack holds that the local simulator needs too, outside the Lambda layer.

The functions never read it: the layer (``layers/core``) does not ship it. ``infra/`` renders it into the
CDK template, and the simulator (installed without CDK) onto its seeded roles.
"""
