"""What a person reads: end-of-run tables, and the Markdown/HTML report with its charts."""
