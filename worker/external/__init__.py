"""External benches: controllers trained and scored on published data sets nobody here wrote.

Each data set is one module here (its reader as a corpus source type, its anchors, its community
metric and the baselines that community reports) and one entry of `BENCHES`, which
`bench/external.py` runs. Data comes from a path the user gives or an installed package, never
from the network.
"""

from __future__ import annotations

from worker.external.bfcl import BENCH as BFCL
from worker.external.common import BenchRow, ExternalBench
from worker.external.jobshop import BENCH as JOBSHOP
from worker.external.routellm import BENCH as ROUTELLM

# name -> the data set's bench; each module adds itself here.
BENCHES: dict[str, ExternalBench] = {}
BENCHES[BFCL.name] = BFCL
BENCHES[JOBSHOP.name] = JOBSHOP
BENCHES[ROUTELLM.name] = ROUTELLM

__all__ = ["BENCHES", "BenchRow", "ExternalBench"]
