"""Set-up checks for ``serverless-karpenter doctor``: pure checks (:mod:`.checks`) over facts read by
:mod:`.gather`."""
