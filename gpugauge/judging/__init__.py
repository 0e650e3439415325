"""The one judge: each result's verdict from its references, and what its test does with it."""
