"""LongEmbed evaluation: tasks, strategies, metrics, embedding cache, runner, reports and plots."""
