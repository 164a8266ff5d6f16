"""The CDK app that puts codeshot in an AWS account (``cdk deploy``; entry: ``infra.app``).

It imports table definitions and setting names from ``codeshot``, never runtime code
paths, so synthesizing needs no AWS access and no platform services.
"""
