// Typeset the math that pymdownx.arithmatex (generic mode) wraps in .arithmatex elements, with the KaTeX that the
// site serves itself (assets/katex/, vendored at build time by docs_hooks/katex.py). Material's document$ emits on
// every page load, instant navigation included.
document$.subscribe(({ body }) => {
  for (const element of body.querySelectorAll(".arithmatex")) {
    renderMathInElement(element, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false, // a formula KaTeX cannot typeset shows in red (.katex-error); the docs check fails on it
    });
  }
});
