"""The framework callbacks load only when asked for, and say what to install when the
framework is missing. Each case runs in a fresh interpreter, so what one import pulled in
cannot hide another's."""

import subprocess
import sys
import unittest

import harness


def run(code):
    """`code` in a fresh interpreter that finds the helper as a trainer would (PYTHONPATH)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=str(harness.PYTHON_DIR))


class FrameworkImportsTest(unittest.TestCase):
    def test_the_package_imports_no_framework(self):
        result = run("import sys, spotvisor_helper\n"
                     "loaded = [m for m in ('transformers', 'lightning', 'accelerate') if m in sys.modules]\n"
                     "print(','.join(loaded) or 'none')")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "none")

    def test_the_hf_callback_without_transformers_says_what_to_install(self):
        # None in sys.modules makes `import transformers` fail as when it is not installed.
        result = run("import sys\nsys.modules['transformers'] = None\n"
                     "try:\n    import spotvisor_helper.hf\nexcept ImportError as e:\n    print(e)\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("spotvisor_helper.hf needs Hugging Face transformers (pip install transformers)", result.stdout)


if __name__ == "__main__":
    unittest.main()
