// Mnemos web page: the one script. Copies a newly shown key to the clipboard.
"use strict";
document.addEventListener("click", function (event) {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  const status = document.getElementById("copy-status");
  const text = source ? source.textContent.trim() : "";
  const done = function (ok) {
    if (status) status.textContent = ok ? "Copied to the clipboard." : "Select the key and copy it.";
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(false); });
  } else {
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    done(false);
  }
});
