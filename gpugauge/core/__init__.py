"""The ground floor: words, JSON records and command-line basics that everything shares.

Nothing here imports anything else of gpugauge.
"""
