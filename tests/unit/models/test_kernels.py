"""oneDNN linear layers: the same values and gradients as F.linear, swapped in only where they apply."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rlxf.models.kernels import OneDNNLinear, onednn_linear_works, use_fast_linears

pytestmark = pytest.mark.skipif(not onednn_linear_works(), reason="this torch build has no usable oneDNN linear")


def _grads(layer: nn.Module, x: torch.Tensor, dy: torch.Tensor):
    x = x.clone().requires_grad_()
    y = layer(x)
    y.backward(dy)
    return y.detach(), x.grad, *(None if p.grad is None else p.grad.clone() for p in (layer.weight, layer.bias) if p is not None)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(3, 5, 16), (1, 16), (2, 1, 1, 16)])
@pytest.mark.parametrize("out_features", [1, 24])
def test_values_and_every_gradient_match_f_linear(bias, shape, out_features):
    torch.manual_seed(0)
    ref = nn.Linear(16, out_features, bias=bias)
    fast = copy.deepcopy(ref)
    assert use_fast_linears(fast, "onednn") == 1 and type(fast) is OneDNNLinear
    x = torch.randn(*shape)
    dy = torch.randn(*shape[:-1], out_features)
    for a, b in zip(_grads(ref, x, dy), _grads(fast, x, dy), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:Input #:UserWarning")
def test_gradcheck_of_the_autograd_function_at_float32_tolerances():
    from rlxf.models.kernels import _OneDNNLinearFn

    # oneDNN's linear is float32 only (no float64 gradcheck): the backward formulas against
    # finite differences of the same function, with float32-sized steps and tolerances
    torch.manual_seed(0)
    x = torch.randn(4, 6, requires_grad=True)
    w = torch.randn(3, 6, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    assert torch.autograd.gradcheck(_OneDNNLinearFn.apply, (x, w, b), eps=1e-2, atol=1e-2, rtol=1e-2)


def test_a_frozen_weight_gets_no_gradient_and_the_input_still_does():
    torch.manual_seed(0)
    layer = nn.Linear(8, 4)
    use_fast_linears(layer, "onednn")
    layer.weight.requires_grad_(False)
    x = torch.randn(5, 8, requires_grad=True)
    layer(x).sum().backward()
    assert layer.weight.grad is None and layer.bias.grad is not None
    torch.testing.assert_close(x.grad, layer.weight.sum(0).expand(5, 8), rtol=1e-5, atol=1e-5)


def test_only_cpu_float32_linears_are_swapped_and_state_dicts_do_not_change():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2), nn.Embedding(4, 8))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert use_fast_linears(model, "torch") == 0 and type(model[0]) is nn.Linear
    assert use_fast_linears(model, "onednn") == 2
    assert [type(m) for m in model] == [OneDNNLinear, nn.ReLU, OneDNNLinear, nn.Embedding]
    assert isinstance(model[0], nn.Linear)                       # PEFT and friends still see a Linear
    assert model.state_dict().keys() == before.keys()
    clone = copy.deepcopy(model)
    torch.testing.assert_close(clone[0](torch.ones(1, 8)), model[0](torch.ones(1, 8)))

    bf16 = nn.Linear(8, 8).to(torch.bfloat16)
    assert use_fast_linears(bf16) == 0 and type(bf16) is nn.Linear
    with pytest.raises(RuntimeError, match="CPU float32"):
        use_fast_linears(bf16, "onednn")
    with pytest.raises(ValueError, match="valid: auto, onednn, torch"):
        use_fast_linears(bf16, "mkl")


def test_a_swapped_layer_falls_back_to_f_linear_for_other_dtypes():
    layer = nn.Linear(8, 4)
    use_fast_linears(layer, "onednn")
    x = torch.randn(3, 8, dtype=torch.float64)
    layer.double()
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))
