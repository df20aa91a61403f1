"""The network: link costs, cluster presets and calibrated profiles, collectives, the fluid timeline,
the token exchanges' timelines, chunk choice and the predicted AllToAll sweep."""
