"""One provider per AWS resource, after karpenter-provider-aws ``pkg/providers/*``.

Each module has a ``Protocol`` (what callers depend on) and a ``Default...Provider`` given its boto3 client:

- ``subnet``, ``securitygroup``, ``ami`` (with the SSM alias look-ups), ``instanceprofile``: what an
  EC2NodeClass's selectors resolve to, put together (and cached) by ``nodeclass.NodeClassResolver``;
- ``launchtemplate`` and ``instance`` (CreateFleet, this cluster's instances), held by
  ``fleet.FleetLauncher``;
- ``model``: the values they answer with; ``errors``: botocore's ``ClientError`` as ``CloudError``.

Cache TTLs are in :mod:`serverless_karpenter.cache`.
"""
