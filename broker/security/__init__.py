"""Security: TLS, authentication (SCRAM, tokens, certificates), the authorizer and the route -> ACL table."""
