"""The request lifecycle, the policy interface and its decisions, and the paper's
scheduler, configuration determiner, kernel manager and the executor that steps them.
"""
