"""Lightning callbacks: feature writing, Optuna pruning and CoG evaluation."""
