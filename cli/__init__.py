"""The `induce` command-line application (thin: parsing options and printing only)."""
