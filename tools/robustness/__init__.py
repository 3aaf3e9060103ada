"""robustness"""
