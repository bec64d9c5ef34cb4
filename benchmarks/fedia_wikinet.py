"""FedIA reproduction on WikiNet (chameleon, squirrel, crocodile; 6 clients).

    FGL_DATA_DIR=../shared/datasets python benchmarks/fedia_wikinet.py [--rounds 200]

The paper gives no WikiNet ρ/β selection, so the Twitch S1 pairs of Table 7 are used, for every base
method of the Twitch script (FedAvg, FedProx, MOON, FedDyn, FedProto, FGSSL, FGGP). The
paper's WikiNet numbers (Table 3) were lost in the text extraction, so no paper rows are shown.
Features are each domain's raw bag-of-words reduced to 128 dimensions by truncated SVD, and
the classes of all three domains are the 5-bin traffic labels.
"""

from fedia_common import main
from fedia_twitch import SETTINGS as TWITCH

ORDER = ["chameleon", "squirrel", "crocodile"]
SETTINGS = {"wikinet": TWITCH["twitch-S1"]}

if __name__ == "__main__":
    main("fedia_wikinet", SETTINGS, ORDER, {}, "FGL_DATA_DIR=../shared/datasets python benchmarks/fedia_wikinet.py")
