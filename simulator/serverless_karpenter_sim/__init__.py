"""The local simulator: moto and a Kubernetes API server in one process, running the real control plane."""

# Installs iam:SimulatePrincipalPolicy on moto (which lacks it) before any of the simulator's servers starts.
# Authorizes every request to moto as IAM would, while the simulated cloud turns that on.
from serverless_karpenter_sim import iam_enforcement as iam_enforcement
from serverless_karpenter_sim import iam_simulation as iam_simulation
