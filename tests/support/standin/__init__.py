"""A fourth study kind, as a researcher would add one (docs/studies.md, "Adding a study kind"): one
package with its lab half (lab.py: which specs are its, its experiment, its lab) and its analysis half
(view.py: its variants, policy, table rows, headline and report), each registered by one line in its
half's registry (tests/test_studies.py). The layering holds inside it too: lab.py imports no
analysis, view.py no harness."""
