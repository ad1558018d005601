"""The simulated fleet (``provider: sim``): a fabric model behind the two backend protocols.

It judges the manifests it is given as a real cluster would and writes what the real programs
print, so the same parsers and verdicts run on it. Its modules, one per concept:
docs/design/simulated-fleet.md.
"""
