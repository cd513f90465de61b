"""Result tables and figures, computed from result rows only."""
