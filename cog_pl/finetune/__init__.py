"""Fine-tuning comparison runs (paper App. C.2)."""
