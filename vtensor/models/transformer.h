// Transformer models (GPT-2 and BERT shapes) built from the builder's ops. ModelConfig's
// fields are reused: image_size is the sequence length, width the hidden size, classes the
// vocabulary.
#pragma once
#include "vtensor/models/builder.h"
#include "vtensor/models/models.h"

namespace vtensor {

struct TransformerShape {
  int layers, heads;
  int n_ctx;  // rows of the position table (positions the model was trained for), at least the sequence length
};

// Decoder-only, pre-LN (GPT-2): tied token embedding / LM head, causal attention, final LN, next-token CE.
void build_gpt(GraphBuilder& b, const ModelConfig& c, const TransformerShape& s);
// Encoder, post-LN (BERT): embedding LN, MLM head (dense + GELU + LN, decoder tied to the token
// embedding, with bias); CE over the vocabulary at every position (masked and unmasked).
void build_bert(GraphBuilder& b, const ModelConfig& c, const TransformerShape& s);

}  // namespace vtensor
