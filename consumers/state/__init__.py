"""The learner's state outside the process: checkpoint files and the state topic."""
