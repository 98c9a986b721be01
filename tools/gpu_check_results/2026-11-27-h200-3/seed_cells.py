"""Item 21's cell on a GPU: BERT's closed loop beside VGG11 at 1x and 5x its share, at several seeds.

    python seed_cells.py BACKEND SEEDS    (SEEDS: comma-separated; from the repository's root)

``experiments/isolation_pairs.py`` runs every cell at seed 0; on the simulator BERT beside an
overloaded VGG11 was 1.013x / 1.017x its ISO target at seeds 1 and 2 before item 21 (a top that
misses its deadline even on the whole GPU takes SMs from a neighbour over its share).  Prints
one line per cell: the victim's mean over its ISO target and the neighbour's service over its
quota's throughput, as ``isolation_pairs.py`` measures them.
"""

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, ".")
import experiments.isolation_pairs as ip

PROFILES = Path("tools/gpu_check_results/2026-11-26-h200/profiles")


@dataclasses.dataclass(frozen=True)
class SeededBench(ip.Bench):
    seed: int = 0

    def base(self) -> dict[str, object]:
        return {**super().base(), "seed": self.seed}


def main(backend: str, seeds: list[int]) -> None:
    for seed in seeds:
        bench = SeededBench("h100", backend, "green", PROFILES, seed=seed)
        for times in (1, 5):
            victim, served = ip.run(bench, "bert", "vgg11", times, "bless")
            print(f"seed {seed} bert beside vgg11 at {times}x: victim {victim:.3f} served {served:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], [int(s) for s in sys.argv[2].split(",")])
