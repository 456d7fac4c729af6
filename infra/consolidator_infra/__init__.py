"""Consolidator's CDK app: one Stage per environment, one construct per capability."""
