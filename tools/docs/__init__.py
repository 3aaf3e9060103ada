"""docs"""
