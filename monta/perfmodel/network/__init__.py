"""The network: collectives, the fluid timeline, the token exchanges' timelines, chunk choice and the
predicted AllToAll sweep (the links and clusters they price are ``monta.hardware``)."""
