"""Routing: embed queries and agents' sample queries, pick agents by cosine similarity."""
