"""``python -m broker``: one broker process (broker/cli.py reads its arguments)."""

import sys

# kio registers Hypothesis strategies for its types whenever Hypothesis imports. Hypothesis is in the test extra,
# not a broker dependency, and importing it was 0.75 s of a broker's 2 s start in every cluster a test starts; a
# broker draws no examples, so it never imports it.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from broker.cli import main  # noqa: E402

sys.exit(main())
