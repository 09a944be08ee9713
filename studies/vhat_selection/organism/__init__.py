"""Re-checking the --value default on the organism's development split."""
