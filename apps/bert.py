"""BERT (Devlin et al., NAACL'19) encoder with a sequence-classification head, written here
without transformers; random weights.

* ``bert``: BERT-large (24 layers, hidden 1024, 16 heads), sequence 128, batch 4: the model and
  batch of the A100 ground-truth profile (profiles/README.md: closest to BLESS's Table 1, 12.8 ms),
  so ``bert`` is the same app on every GPU.
* ``bert_base``: BERT-base (12 layers, hidden 768, 12 heads), sequence 128, batch 4.

Inputs are token ids, token types and an attention mask (int64, like Hugging Face's BertModel).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn

from bless.build.zoo import App, cross_entropy


@dataclass(frozen=True)
class BertConfig:
    layers: int
    hidden: int
    heads: int
    vocab: int = 30522
    max_positions: int = 512
    type_vocab: int = 2
    classes: int = 2

    @property
    def intermediate(self) -> int:
        return 4 * self.hidden


BASE = BertConfig(layers=12, hidden=768, heads=12)
LARGE = BertConfig(layers=24, hidden=1024, heads=16)
SEQUENCE = 128


class SelfAttention(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.heads, self.head_dim = c.heads, c.hidden // c.heads
        self.query = nn.Linear(c.hidden, c.hidden)
        self.key = nn.Linear(c.hidden, c.hidden)
        self.value = nn.Linear(c.hidden, c.hidden)
        self.output = nn.Linear(c.hidden, c.hidden)
        self.norm = nn.LayerNorm(c.hidden, eps=1e-12)

    def _split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        context = context.transpose(1, 2).reshape(x.shape)
        return self.norm(self.output(context) + x)


class Layer(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.attention = SelfAttention(c)
        self.intermediate = nn.Linear(c.hidden, c.intermediate)
        self.act = nn.GELU()
        self.output = nn.Linear(c.intermediate, c.hidden)
        self.norm = nn.LayerNorm(c.hidden, eps=1e-12)

    def forward(self, x, mask):
        x = self.attention(x, mask)
        return self.norm(self.output(self.act(self.intermediate(x))) + x)


class Bert(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.words = nn.Embedding(c.vocab, c.hidden)
        self.positions = nn.Embedding(c.max_positions, c.hidden)
        self.types = nn.Embedding(c.type_vocab, c.hidden)
        self.norm = nn.LayerNorm(c.hidden, eps=1e-12)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.pooler = nn.Linear(c.hidden, c.hidden)
        self.classifier = nn.Linear(c.hidden, c.classes)

    def forward(self, input_ids, token_type_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.norm(self.words(input_ids) + self.positions(positions) + self.types(token_type_ids))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


def tokens(batch: int, sequence: int = SEQUENCE):
    ids = torch.randint(0, BASE.vocab, (batch, sequence))
    return ids, torch.zeros(batch, sequence, dtype=torch.int64), torch.ones(batch, sequence, dtype=torch.int64)


APPS = [
    App(
        name="bert",
        batch=4,
        model=lambda: Bert(LARGE),
        inputs=tokens,
        loss=cross_entropy,
        train_batch=8,
        description="BERT-large, sequence 128, classification head",
    ),
    App(
        name="bert_base",
        batch=4,
        model=lambda: Bert(BASE),
        inputs=tokens,
        loss=cross_entropy,
        train_batch=8,
        description="BERT-base, sequence 128, classification head",
    ),
]
