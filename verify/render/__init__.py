"""Writers for the Markdown/JSON/figure reports in ``reports/``."""
