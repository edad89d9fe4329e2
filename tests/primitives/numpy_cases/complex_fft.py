"""Examples for the complex+fft family: real and imaginary parts, conjugates, angle, vdot
and cnp.fft (issue 13). Derivatives of complex inputs are checked along complex directions
(check_grads), JAX's convention; references are numpy's, which JAX's values agree with."""

import numpy as np

_rng = np.random.default_rng(13)


def _c(*shape):
    return _rng.standard_normal(shape) + 1j * _rng.standard_normal(shape)


def _r(*shape):
    return _rng.standard_normal(shape)


Z3, Z23, Z234 = _c(3), _c(2, 3), _c(2, 3, 4)
X4, X35, X234 = _r(4), _r(3, 5), _r(2, 3, 4)
Z64 = _c(2, 3).astype(np.complex64)
I3 = np.array([1, -2, 3])

EXAMPLES = {
    "real": [dict(args=(Z23,)), dict(args=(Z3 * 2,)), dict(args=(X35,)), dict(args=(I3,))],
    "imag": [dict(args=(Z23,)), dict(args=(Z234,)), dict(args=(X4,)), dict(args=(I3,))],
    "conj": [dict(args=(Z23,)), dict(args=(Z3,)), dict(args=(X4,)), dict(args=(I3,))],
    "conjugate": [dict(args=(Z234,)), dict(args=(X35,))],
    "angle": [dict(args=(Z23,)), dict(args=(Z3,), kwargs={"deg": True}),
              dict(args=(np.array([-2.0, 3.0, -0.5]),)), dict(args=(I3,))],
    "vdot": [dict(args=(Z3, _c(3))), dict(args=(Z23, _c(6))), dict(args=(X4, _c(4))),
             dict(args=(Z234, _r(2, 3, 4))), dict(args=(X35, _r(15))),
             dict(args=(I3, np.array([2, 0, 1])))],
    "fft.fft": [dict(args=(Z23,)), dict(args=(X35,)), dict(args=(Z23, 5)),
                dict(args=(Z234, 2, 0)), dict(args=(X4,), kwargs={"norm": "ortho"}),
                dict(args=(Z3,), kwargs={"norm": "forward", "n": 4}), dict(args=(I3,))],
    "fft.ifft": [dict(args=(Z23,)), dict(args=(X35, 7, 0)),
                 dict(args=(Z234,), kwargs={"axis": 1, "norm": "ortho"}),
                 dict(args=(Z3,), kwargs={"n": 2, "norm": "forward"})],
    "fft.fft2": [dict(args=(Z23,)), dict(args=(X234,)), dict(args=(Z234, (3, 2))),
                 dict(args=(Z234,), kwargs={"axes": (0, 2), "norm": "ortho"})],
    "fft.ifft2": [dict(args=(Z23,)), dict(args=(Z234,), kwargs={"s": (4, 5)}),
                  dict(args=(X35,), kwargs={"norm": "forward"})],
    "fft.fftn": [dict(args=(Z234,)), dict(args=(X35,)),
                 dict(args=(Z234,), kwargs={"axes": (1,), "norm": "ortho"}),
                 dict(args=(Z234,), kwargs={"s": (3, 2, 5), "axes": (0, 1, 2)})],
    "fft.ifftn": [dict(args=(Z234,)), dict(args=(X234,), kwargs={"axes": (0, 2)}),
                  dict(args=(Z23,), kwargs={"s": (1, 4), "axes": (0, 1), "norm": "forward"})],
    "fft.rfft": [dict(args=(X4,)), dict(args=(X35,)), dict(args=(X35, 8)),
                 dict(args=(X234, 3, 1)), dict(args=(X4,), kwargs={"norm": "ortho"}),
                 dict(args=(X35,), kwargs={"axis": 0, "norm": "forward"}),
                 dict(args=(I3,))],
    "fft.rfft2": [dict(args=(X35,)), dict(args=(X234,), kwargs={"s": (4, 4)}),
                  dict(args=(X234,), kwargs={"axes": (0, 1), "norm": "ortho"})],
    "fft.rfftn": [dict(args=(X234,)), dict(args=(X35,), kwargs={"norm": "forward"}),
                  dict(args=(X234,), kwargs={"s": (3, 5), "axes": (0, 2)})],
    "fft.irfft": [dict(args=(Z23,)), dict(args=(Z23, 5)), dict(args=(Z234, 4, 1)),
                  dict(args=(Z3,), kwargs={"n": 7, "norm": "ortho"}),
                  dict(args=(Z234,), kwargs={"axis": 0, "norm": "forward"}),
                  dict(args=(X35,))],
    "fft.irfft2": [dict(args=(Z23,)), dict(args=(Z234,), kwargs={"s": (3, 5)}),
                   dict(args=(Z234,), kwargs={"axes": (0, 1), "norm": "ortho"})],
    "fft.irfftn": [dict(args=(Z234,)), dict(args=(Z23,), kwargs={"norm": "forward"}),
                   dict(args=(Z234,), kwargs={"s": (4, 3), "axes": (2, 1)})],
    "fft.hfft": [dict(args=(Z23,)), dict(args=(Z3, 4)), dict(args=(Z234, 5, 0)),
                 dict(args=(Z23,), kwargs={"norm": "ortho"}),
                 dict(args=(X35,), kwargs={"norm": "forward"})],
    "fft.ihfft": [dict(args=(X4,)), dict(args=(X35, 6)), dict(args=(X234, 3, 0)),
                  dict(args=(X35,), kwargs={"norm": "ortho"}),
                  dict(args=(X4,), kwargs={"norm": "forward"})],
    "fft.fftfreq": [dict(args=(8,)), dict(args=(5, 0.25)), dict(args=(6, np.array(0.5)))],
    "fft.rfftfreq": [dict(args=(8,)), dict(args=(7, 2.0)), dict(args=(4, np.array(0.1)))],
    "fft.fftshift": [dict(args=(X4,)), dict(args=(Z23,)), dict(args=(X234,), kwargs={"axes": 1}),
                     dict(args=(Z234,), kwargs={"axes": (0, 2)}), dict(args=(I3,))],
    "fft.ifftshift": [dict(args=(_r(5),)), dict(args=(Z23,)),
                      dict(args=(X234,), kwargs={"axes": (-1,)}), dict(args=(Z64,))],
}
