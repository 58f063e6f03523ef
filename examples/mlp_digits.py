"""Train an MLP on the 8x8 handwritten digits shipped with nexus; print the test accuracy.

    python examples/mlp_digits.py [--epochs 30] [--batch-size 32]

The README's main job. About 20 s on 2 cores; reaches >= 97 % test accuracy.
"""

import argparse
import time

import nexus as nx
from nexus import Activation, GraphBuilder, Shape


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--save", default=None, help="write the trained model to this checkpoint file")
    args = ap.parse_args()

    x_train, y_train, x_test, y_test = nx.data.load("digits")
    g = GraphBuilder(seed=0)
    g.input("pixels", Shape(args.batch_size, 64)).dense(256, Activation.RELU).dropout(0.2)
    g.dense(10, Activation.SOFTMAX)
    model = g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))
    model.summary()

    start = time.perf_counter()
    model.fit(x_train, y_train, epochs=args.epochs, batch_size=args.batch_size,
              validation_data=(x_test, y_test))
    seconds = time.perf_counter() - start
    result = model.evaluate(x_test, y_test)
    print(f"trained {args.epochs} epochs in {seconds:.1f} s")
    print(f"test loss {result['loss']:.4f}, test accuracy {100 * result['accuracy']:.2f}%")
    if args.save:
        model.save(args.save)
        print(f"saved {args.save}")


if __name__ == "__main__":
    main()
