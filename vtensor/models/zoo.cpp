// mlp, vgg, resnet, gpt and bert in the shapes of their papers, with tiny presets for tests.
#include <stdexcept>

#include "vtensor/models/builder.h"
#include "vtensor/models/models.h"
#include "vtensor/models/transformer.h"

namespace vtensor {
namespace {

void build_mlp(GraphBuilder& b, const ModelConfig& c, int hidden_layers, float dropout) {
  b.layer("input", LayerKind::kOther);
  auto [x, labels] = b.data(c.batch, c.image_size, 0, 0, c.classes);
  TensorId h = x;
  for (int i = 0; i < hidden_layers; ++i) {
    b.layer("fc" + std::to_string(i + 1), LayerKind::kLinear);
    h = b.relu(b.linear(h, c.width));
    if (dropout > 0) h = b.dropout(h, dropout);
  }
  b.layer("classifier", LayerKind::kLinear);
  b.softmax_ce(b.linear(h, c.classes), labels);
}

// cfg: channel counts as multiples of the base width (64 in VGG), 0 = max pool.
void build_vgg(GraphBuilder& b, const ModelConfig& c, const std::vector<int>& cfg, bool batchnorm, int fc,
               float dropout) {
  b.layer("input", LayerKind::kOther);
  auto [x, labels] = b.data(c.batch, 3, c.image_size, c.image_size, c.classes);
  TensorId h = x;
  int conv = 0, pool = 0;
  for (int m : cfg) {
    if (m == 0) {
      b.layer("pool" + std::to_string(++pool), LayerKind::kPool);
      h = b.maxpool(h, 2, 2);
      continue;
    }
    b.layer("conv" + std::to_string(++conv), LayerKind::kConv);
    h = b.conv2d(h, m * c.width / 64, 3, 1, 1, !batchnorm);
    if (batchnorm) h = b.batchnorm(h);
    h = b.relu(h);
  }
  b.layer("flatten", LayerKind::kOther);
  h = b.flatten(h);
  for (int i = 0; i < 2; ++i) {
    b.layer("fc" + std::to_string(i + 1), LayerKind::kLinear);
    h = b.relu(b.linear(h, fc));
    if (dropout > 0) h = b.dropout(h, dropout);
  }
  b.layer("classifier", LayerKind::kLinear);
  b.softmax_ce(b.linear(h, c.classes), labels);
}

TensorId conv_bn(GraphBuilder& b, TensorId x, int k, int r, int stride, bool relu) {
  TensorId h = b.batchnorm(b.conv2d(x, k, r, stride, r / 2));
  return relu ? b.relu(h) : h;
}

// ResNet (He et al. 2016): basic blocks (18/34) or bottlenecks (50). Inputs below 64 pixels
// get the CIFAR stem (3x3 conv, no max pool) so tiny presets keep some spatial extent.
void build_resnet(GraphBuilder& b, const ModelConfig& c, const std::vector<int>& depths, bool bottleneck) {
  b.layer("input", LayerKind::kOther);
  auto [x, labels] = b.data(c.batch, 3, c.image_size, c.image_size, c.classes);
  b.layer("stem", LayerKind::kConv);
  TensorId h;
  if (c.image_size >= 64) {
    h = conv_bn(b, x, c.width, 7, 2, true);
    b.layer("stem_pool", LayerKind::kPool);
    h = b.maxpool(h, 3, 2, 1);
  } else {
    h = conv_bn(b, x, c.width, 3, 1, true);
  }
  const int expansion = bottleneck ? 4 : 1;
  int in_ch = c.width;
  for (size_t s = 0; s < depths.size(); ++s) {
    const int ch = c.width << s;
    for (int blk = 0; blk < depths[s]; ++blk) {
      const int stride = (s > 0 && blk == 0) ? 2 : 1;
      const std::string name = "layer" + std::to_string(s + 1) + "." + std::to_string(blk);
      b.layer(name, LayerKind::kConv);
      TensorId shortcut = h;
      if (stride != 1 || in_ch != ch * expansion) shortcut = conv_bn(b, h, ch * expansion, 1, stride, false);
      TensorId y;
      if (bottleneck) {
        y = conv_bn(b, h, ch, 1, 1, true);
        y = conv_bn(b, y, ch, 3, stride, true);
        y = conv_bn(b, y, ch * expansion, 1, 1, false);
      } else {
        y = conv_bn(b, h, ch, 3, stride, true);
        y = conv_bn(b, y, ch, 3, 1, false);
      }
      h = b.relu(b.add(y, shortcut));
      in_ch = ch * expansion;
    }
  }
  b.layer("pool", LayerKind::kPool);
  h = b.global_avgpool(h);
  b.layer("classifier", LayerKind::kLinear);
  b.softmax_ce(b.linear(h, c.classes), labels);
}

const std::vector<int> kVgg16 = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
const std::vector<int> kVgg11 = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
const std::vector<int> kVggTiny = {64, 0, 128, 0, 256, 0};

}  // namespace

const std::vector<ModelInfo>& model_registry() {
  using C = const ModelConfig&;
  static const std::vector<ModelInfo> registry = {
      {"mlp-tiny", "2 hidden layers of 64, dropout 0.1, 64 features", 16, 64, 64, 10,
       [](GraphBuilder& b, C c) { build_mlp(b, c, 2, 0.1f); }},
      {"mlp", "3 hidden layers of 1024, dropout 0.1, 784 features (MNIST-sized)", 128, 784, 1024, 10,
       [](GraphBuilder& b, C c) { build_mlp(b, c, 3, 0.1f); }},
      {"vgg-tiny", "3 conv+bn layers (width 8) and 2 fc of 32, 16x16 input", 32, 16, 8, 10,
       [](GraphBuilder& b, C c) { build_vgg(b, c, kVggTiny, true, 32, 0.1f); }},
      {"vgg11", "VGG-11 (Simonyan & Zisserman), 224x224", 64, 224, 64, 1000,
       [](GraphBuilder& b, C c) { build_vgg(b, c, kVgg11, false, 4096, 0.5f); }},
      {"vgg16", "VGG-16 (Simonyan & Zisserman), 224x224, as in vDNN", 64, 224, 64, 1000,
       [](GraphBuilder& b, C c) { build_vgg(b, c, kVgg16, false, 4096, 0.5f); }},
      {"resnet-tiny", "ResNet with one basic block per stage, width 8, 16x16 input", 32, 16, 8, 10,
       [](GraphBuilder& b, C c) { build_resnet(b, c, {1, 1, 1, 1}, false); }},
      {"resnet18", "ResNet-18 (He et al.), 224x224", 64, 224, 64, 1000,
       [](GraphBuilder& b, C c) { build_resnet(b, c, {2, 2, 2, 2}, false); }},
      {"resnet34", "ResNet-34, 224x224", 64, 224, 64, 1000,
       [](GraphBuilder& b, C c) { build_resnet(b, c, {3, 4, 6, 3}, false); }},
      {"resnet50", "ResNet-50 (bottleneck blocks), 224x224", 32, 224, 64, 1000,
       [](GraphBuilder& b, C c) { build_resnet(b, c, {3, 4, 6, 3}, true); }},
      // Transformers: "input" is the sequence length, "width" the hidden size, "classes" the vocabulary.
      {"gpt-tiny", "GPT-2 shape, 2 layers, 4 heads, hidden 64, seq 32, vocab 64", 8, 32, 64, 64,
       [](GraphBuilder& b, C c) { build_gpt(b, c, {2, 4, 64}); }},
      {"gpt2-small", "GPT-2 small (124M): 12 layers, 12 heads, hidden 768, seq 1024", 8, 1024, 768, 50257,
       [](GraphBuilder& b, C c) { build_gpt(b, c, {12, 12, 1024}); }},
      {"gpt2-medium", "GPT-2 medium (355M): 24 layers, 16 heads, hidden 1024, seq 1024", 4, 1024, 1024, 50257,
       [](GraphBuilder& b, C c) { build_gpt(b, c, {24, 16, 1024}); }},
      {"gpt2-large", "GPT-2 large (774M): 36 layers, 20 heads, hidden 1280, seq 1024", 2, 1024, 1280, 50257,
       [](GraphBuilder& b, C c) { build_gpt(b, c, {36, 20, 1024}); }},
      {"bert-tiny", "BERT shape, 2 layers, 4 heads, hidden 64, seq 32, vocab 64, MLM", 8, 32, 64, 64,
       [](GraphBuilder& b, C c) { build_bert(b, c, {2, 4, 64}); }},
      {"bert-base", "BERT-base (110M): 12 layers, 12 heads, hidden 768, seq 128, MLM", 32, 128, 768, 30522,
       [](GraphBuilder& b, C c) { build_bert(b, c, {12, 12, 512}); }},
      {"bert-large", "BERT-large (340M): 24 layers, 16 heads, hidden 1024, seq 128, MLM", 8, 128, 1024, 30522,
       [](GraphBuilder& b, C c) { build_bert(b, c, {24, 16, 512}); }},
  };
  return registry;
}

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const auto& m : model_registry()) out.push_back(m.name);
  return out;
}

static const ModelInfo& find_model(const std::string& name) {
  for (const auto& m : model_registry())
    if (m.name == name) return m;
  std::string accepted;
  for (const auto& n : model_names()) accepted += (accepted.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown model '" + name + "'; accepted: " + accepted);
}

ModelConfig resolve_model(ModelConfig c) {
  const ModelInfo& m = find_model(c.name);
  auto fill = [](int& v, int def, const char* what) {
    if (v == 0) v = def;
    if (v < 0) throw std::invalid_argument(std::string("--") + what + " must be positive, got " + std::to_string(v));
  };
  fill(c.batch, m.batch, "batch");
  fill(c.image_size, m.image_size, "image-size");
  fill(c.width, m.width, "width");
  fill(c.classes, m.classes, "classes");
  if (c.classes < 2) throw std::invalid_argument("--classes must be at least 2");
  return c;
}

Graph build_model(const ModelConfig& cfg) {
  ModelConfig c = resolve_model(cfg);
  Graph g;
  GraphBuilder b(g, c.seed);
  find_model(c.name).build(b, c);
  return g;
}

}  // namespace vtensor
