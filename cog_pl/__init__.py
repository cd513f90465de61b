"""ImageNet-CoG, the concept generalization benchmark, as PyTorch Lightning modules."""

__version__ = "0.1.0"
