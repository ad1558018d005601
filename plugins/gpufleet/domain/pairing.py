"""Pair planning and bad-node localization for 2-node fabric tests. Pure domain code.

Pass 1 pairs every idle node with another (an odd one out waits for a node that passed).
Pass 2 re-tests each node of a failed pair, and the odd one out, against known-good nodes, in
rounds where no node appears twice (each test needs both nodes' GPUs). A node that passes once
with a known-good partner is good; one that fails with two different known-good partners is bad.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Pair = tuple[str, str]


def plan_pass1(nodes: list[str]) -> tuple[list[Pair], list[str]]:
    """Disjoint pairs covering every node, and the odd one out (if any)."""
    ordered = sorted(nodes)
    pairs = [(ordered[i], ordered[i + 1]) for i in range(0, len(ordered) - 1, 2)]
    odd = [ordered[-1]] if len(ordered) % 2 else []
    return pairs, odd


@dataclass
class Localizer:
    """Drives pass 2. Feed it pass-1 results, then ask for rounds until ``done``."""

    nodes: list[str]
    odd: list[str] = field(default_factory=list)
    good: set[str] = field(default_factory=set)
    suspects: set[str] = field(default_factory=set)
    failures: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # node -> [(p, why)]
    tried: dict[str, set[str]] = field(default_factory=dict)
    bad: dict[str, str] = field(default_factory=dict)

    def record_pass1(self, pair: Pair, passed: bool) -> None:
        if passed:
            self.good.update(pair)
        else:
            self.suspects.update(pair)

    def record(self, pair: Pair, passed: bool, why: str = "") -> None:
        """A pass-2 result: ``pair[0]`` is the candidate, ``pair[1]`` a known-good node."""
        node, partner = pair
        self.tried.setdefault(node, set()).add(partner)
        if passed:
            self.suspects.discard(node)
            self.good.add(node)
        else:
            self.failures.setdefault(node, []).append((partner, why))
            if len({p for p, _ in self.failures[node]}) >= 2:
                self.suspects.discard(node)
                self.bad[node] = why or "failed with known-good partners"

    @property
    def candidates(self) -> list[str]:
        """Nodes still to be decided: suspects of pass 1 and the odd one out."""
        pending = set(self.suspects) | {n for n in self.odd if n not in self.good}
        return sorted(pending - set(self.bad))

    def next_round(self) -> list[Pair]:
        """Disjoint (candidate, known-good partner) pairs; empty when nothing more can be done."""
        used: set[str] = set()
        pairs: list[Pair] = []
        partners = sorted(self.good)
        for node in self.candidates:
            for partner in partners:
                if partner in used or partner in self.tried.get(node, set()):
                    continue
                pairs.append((node, partner))
                used.update((node, partner))
                break
        return pairs

    @property
    def done(self) -> bool:
        return not self.next_round()

    def outcome(self) -> tuple[dict[str, str], list[str], list[str]]:
        """(bad nodes with reasons, inconclusive suspects, untested odd nodes)."""
        inconclusive = sorted(n for n in self.candidates if n not in self.odd)
        untested = sorted(n for n in self.candidates if n in self.odd and n not in self.tried)
        # an odd node tried once and failed but without a second partner is inconclusive too
        inconclusive += sorted(n for n in self.candidates if n in self.odd and n in self.tried)
        return dict(self.bad), inconclusive, untested
