"""Clock sync: estimators (pairs, fits, the network effect) and real baselines to compare with."""
