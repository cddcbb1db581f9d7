"""A whole model: loaded (`load`), traced to torch.fx (`graph`), cut into the fused groups
Inductor would form (`groups`, each group's standalone code in `code`), profiled (`profile`),
its groups ranked by what porting them would gain (`rank`), and the profile written and read
(`report`). `porter profile` and `porter patch` are built on it."""
