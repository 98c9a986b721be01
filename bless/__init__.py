"""bless: bubble-less spatial-temporal GPU sharing (after BLESS, EuroSys'25)."""

__version__ = "0.1.0"
