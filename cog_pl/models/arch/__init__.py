"""Architectures of the paper's models that neither timm nor torchvision provide."""
