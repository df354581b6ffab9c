"""Everything that computes: the arq worker, the stage runner, corpus, envs, trainers.

A worker never downloads from a model hub: base models come from a folder, MODEL_CACHE or the
built-in SmolLM2 (worker/models/base_model.py). Importing this package puts the Hugging Face
libraries in offline mode before any of them loads, in the worker and in every trainer child:
without it, bitsandbytes on a CPU with AVX512-BF16 asks the hub for a compiled kernel
(`kernels-community/quantization-bitsandbytes`) at import, code fetched and run at run time.
"""

import os

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[_name] = "1"
