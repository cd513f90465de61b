"""Feature stores (v1 on-disk contract) and conversion to and from the released code's X_Y.pth files."""
