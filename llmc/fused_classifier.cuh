/*
fused_classifier.cuh — softmax + cross-entropy + its gradient, in one pass over the logits.

logits is (N, Vp): the real vocabulary is the first V columns, the rest is padding (GPT-2 pads
50257 to 50304 so matmuls tile well) and is ignored: it gets probability 0 and gradient 0.

  p = softmax(logits[:V]),   loss[n] = −log p[target[n]]
  if dloss != 0, the logits are overwritten by their gradient:
      dlogits[v] = dloss · (p[v] − [v == target])   for v < V,   0 for the padding
where dloss is ∂(total loss)/∂(loss[n]) — 1/(B·T·accumulation steps) for the mean loss.

Writing the gradient in place of the logits means the (N, Vp) buffer — the largest activation of
the model — exists once. The normalizer is summed in double (50k terms).

Test: test/test_ops.cpp (finite differences of the loss), the model against PyTorch.
*/
#pragma once
#include <cmath>
#include "common.h"

inline void fused_classifier_cpu(float* logits, float* losses, const int* targets,
                                 int N, int V, int Vp, float dloss) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* row = logits + (size_t)n * Vp;
        float m = -INFINITY;
        for (int v = 0; v < V; v++) m = row[v] > m ? row[v] : m;
        double sum = 0.0;
        for (int v = 0; v < V; v++) sum += expf(row[v] - m);
        float log_sum = (float)log(sum);
        int tgt = targets[n];
        losses[n] = -(row[tgt] - m - log_sum);
        if (dloss != 0.0f) {
            for (int v = 0; v < V; v++) {
                float p = expf(row[v] - m - log_sum);
                row[v] = dloss * (p - (v == tgt ? 1.0f : 0.0f));
            }
            for (int v = V; v < Vp; v++) row[v] = 0.0f;
        }
    }
}

inline void fused_classifier(const Ctx&, float* logits, float* losses, const int* targets,
                             int N, int V, int Vp, float dloss) {
    fused_classifier_cpu(logits, losses, targets, N, V, Vp, dloss);
}
