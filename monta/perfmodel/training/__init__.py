"""The training step: compute costs, parallel strategies, memory per rank, the predicted step,
the planner that ranks strategies, and the emulated clock that dilates a step's pieces."""
