"""Outbound HTTP to places users name (agent URLs, callbacks, URL embeds): public
addresses only, checked when connecting.

:mod:`codeshot.net.addresses` decides which addresses and URLs the platform may reach;
:mod:`codeshot.net.http` is the one HTTP client that connects only to an address it has
just checked, so DNS cannot answer one thing to the check and another to the connection.
"""
