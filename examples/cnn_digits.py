"""Train a small CNN (conv, batch norm, pooling, a residual block) on the 8x8 digits.

    python examples/cnn_digits.py [--epochs 15]
"""

import argparse

import nexus as nx
from nexus import GraphBuilder, Shape


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=15)
    args = ap.parse_args()

    x_train, y_train, x_test, y_test = nx.data.load("digits")
    x_train, x_test = x_train.reshape(-1, 1, 8, 8), x_test.reshape(-1, 1, 8, 8)

    g = GraphBuilder(seed=0)
    g.input("image", Shape(32, 1, 8, 8)).conv2d(16, 3, padding="same", activation="relu").batch_norm()
    g.residual(lambda b: b.conv2d(16, 3, padding="same", activation="relu").conv2d(16, 3, padding="same"))
    g.activation("relu").max_pool2d(2).flatten().dense(64, "relu").dense(10, "softmax")
    model = g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=2e-3))
    model.summary()
    model.fit(x_train, y_train, epochs=args.epochs, batch_size=32, validation_data=(x_test, y_test))
    print(f"test accuracy {100 * model.evaluate(x_test, y_test)['accuracy']:.2f}%")


if __name__ == "__main__":
    main()
