"""The porter's side of the judge: the compile tier, the projection, the interpreted check on a
CPU and the measured tier on the device. The Benchmark role (`porter.roles.benchmark`) calls
these; the verdicts themselves come from `harness` and the ledger keeps or reverts."""
