"""``python -m cudnn_py info | algos ...``"""
import sys

from .cli import main

sys.exit(main())
