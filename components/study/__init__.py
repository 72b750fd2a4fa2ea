"""The consistency study: one table and one learning curve from the arms' evaluation results."""
