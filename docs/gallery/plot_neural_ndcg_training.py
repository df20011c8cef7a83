"""
Training a linear scorer with NeuralNDCG
========================================

A linear model trained on synthetic queries with :func:`smoothrank.losses.neural_ndcg`, its
training loss and its exact NDCG@10 (:func:`smoothrank.metrics.ndcg`) after each step.
"""

import matplotlib.pyplot as plt
import torch

from smoothrank import losses, metrics
from smoothrank.datasets import make_synthetic

torch.manual_seed(0)
data = make_synthetic(64, 10, 5, seed=0)  # 64 queries of 10 documents, 5 features
X = torch.tensor(data.features, dtype=torch.float32).reshape(64, 10, 5)
y = torch.tensor(data.labels, dtype=torch.float32).reshape(64, 10)

model = torch.nn.Linear(5, 1)
optimiser = torch.optim.Adam(model.parameters(), lr=0.05)
history = []
for step in range(40):
    optimiser.zero_grad()
    scores = model(X).squeeze(-1)
    loss = losses.neural_ndcg(scores, y, temperature=1.0)
    loss.backward()
    optimiser.step()
    history.append((loss.item(), metrics.ndcg(scores.detach(), y, k=10).item()))

fig, ax = plt.subplots(figsize=(5, 3))
ax.plot([h[0] for h in history], label="NeuralNDCG loss")
ax.plot([h[1] for h in history], label="NDCG@10")
ax.set_xlabel("step")
ax.legend()
fig.tight_layout()
print(f"NDCG@10 after {len(history)} steps: {history[-1][1]:.4f}")
