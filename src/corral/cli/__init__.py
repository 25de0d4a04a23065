"""corral's user command line: `corral up`, `submit`, `queue`, `cancel`, `show`, `nodes`, `acct`."""
