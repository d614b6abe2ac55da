"""ExitTrain and the training around it: trainers, distillation, held-out evaluation, exit mass."""
