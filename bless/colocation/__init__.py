"""Deciding which apps share a GPU: colocation prediction (KACE) and admission checks."""
