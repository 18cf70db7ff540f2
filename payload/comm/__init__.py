"""Communication between ranks and GPUs: starting the attempt's ranks and their rendezvous
(``ranks``), the process group as one rank uses it (``group``), the collectives sweep and its
arithmetic, GPU-to-GPU copies (``p2p``), and the EFA environment NCCL needs."""
