"""FedIA reproduction on Twitch S1 and S3: FedAvg / FedProx with and without FedIA.

    FGL_DATA_DIR=../shared/datasets python benchmarks/fedia_twitch.py [--rounds 200]

ρ/β are the paper's Table 7 selections. Paper rows: Table 4 (S1) and Table 2 (S3), computed
on 128-dimensional Twitch features; these runs use the raw 3,170-dimensional ones.
"""

from fedia_common import main

ORDER = ["ES", "DE", "FR", "RU", "EN", "PT"]  # the paper's column order
SETTINGS = {
    "twitch-S1": {"fedavg": (0.1, 0.1), "fedprox": (0.9, 0.3)},
    "twitch-S3": {"fedavg": (0.3, 0.3), "fedprox": (0.5, 0.7)},
}
PAPER = {
    "twitch-S1": {
        "FedAvg": ["66.46±0.02", "38.38±0.02", "58.84±0.03", "68.74±0.03", "49.36±0.02", "61.57±0.00", "57.22±0.01"],
        "FedAvg + FedIA": ["64.77±0.05", "55.90±0.03", "58.72±0.03", "65.41±0.06", "58.66±0.04", "60.85±0.04",
                           "60.72±0.02"],
        "FedProx": ["65.70±0.00", "38.20±0.01", "58.45±0.00", "68.37±0.02", "48.73±0.01", "61.31±0.00", "56.79±0.00"],
        "FedProx + FedIA": ["70.81±0.08", "51.44±0.14", "60.07±0.10", "73.34±0.10", "53.28±0.06", "68.73±0.09",
                            "62.95±0.05"],
    },
    "twitch-S3": {
        "FedAvg": ["66.98±0.06", "38.76±0.01", "59.38±0.05", "65.06±0.02", "48.87±0.03", "59.97±0.10", "56.50±0.04"],
        "FedAvg + FedIA": ["71.29±0.00", "38.95±0.00", "62.75±0.00", "76.40±0.00", "45.53±0.00", "64.02±0.00",
                           "59.82±0.00"],
        "FedProx": ["66.45±0.00", "38.47±0.00", "59.63±0.00", "65.55±0.03", "48.02±0.01", "59.48±0.00", "56.27±0.01"],
        "FedProx + FedIA": ["69.98±0.18", "50.57±0.15", "62.56±0.17", "73.29±0.16", "55.37±0.47", "68.85±0.37",
                            "63.44±0.11"],
    },
}

if __name__ == "__main__":
    main("fedia_twitch", SETTINGS, ORDER, PAPER,
         "FGL_DATA_DIR=../shared/datasets python benchmarks/fedia_twitch.py")
